"""The application layer: the `arl` command and the composition roots it runs (the training
driver, doctor, plan, eval, export, play, the run report). The only code that wires every
package together; nothing below it imports it."""
