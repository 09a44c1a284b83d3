"""Planning a training run that cannot run here, by arithmetic over one analysis
(``docs/plan.md``). ``states``: the model states each GPU holds at rest, by sharding
strategy, precision and optimizer."""
