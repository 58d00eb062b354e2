"""``workbench deploy`` and the Ray application's autoscaling."""
