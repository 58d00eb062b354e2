"""What every tab of a dashboard shares: the session's engine store and model selection, Bokeh and
Panel plumbing (document changes, lossless writes, the notebook comm, local stylesheets), the
config-write banner."""
