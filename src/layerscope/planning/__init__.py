"""Planning a training run that cannot run here, by arithmetic over one analysis
(``docs/plan.md``). ``states``: the model states each GPU holds at rest, by sharding
strategy, precision and optimizer; ``comm``: the collectives of a step, per FSDP2
unit and DDP bucket; ``checkpointing``: the repeated blocks, and which
modules to checkpoint for an activation budget."""
