"""Executor tools. Tools are registered explicitly in `registry.build_default_registry`; importing a
module here never registers anything."""
