"""The Tuning tab: the tuner's form, run, plot, table and outcome."""
