"""Model config edits as text and as load-time overrides, shared by the dashboard, the
notebook widgets and the tuner (:mod:`workbench.tuning`).

* :mod:`workbench.config_edits.knobs` - the tunable knobs of a ``config.pbtxt``, read and
  rewritten in place (comments, indent and list style kept);
* :mod:`workbench.config_edits.pbtxt_edit`, :mod:`workbench.config_edits.pbtxt_spans` - the
  comment-preserving text rewrite underneath;
* :mod:`workbench.config_edits.overrides` - a config tried as a load with a ``config``
  override (Triton's load API), never written to the file.

Layering: an adapter like :mod:`workbench.perf`; it uses only the names :mod:`workbench`
exports.
"""
