"""Code a user writes: their own env, trained with `arl train ... env.name=examples.<module>:make`
(see the README, "Write your own environment")."""
