"""Training from a config file: SB3 algorithms, callbacks, the train CLI."""
