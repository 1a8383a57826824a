"""Ray actors: the only package that imports ray."""
