"""The Config tab: ``config.pbtxt`` in an editor with live validation and a knob form."""
