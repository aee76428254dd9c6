"""Which backend serves each tool, chosen by the executor's settings."""

from __future__ import annotations

from services.executor.tools.backends import ToolBackends
from services.executor.tools.sql_backends import build_sql_backends
from shared.config import ExecutorSettings


def build_backends(settings: ExecutorSettings) -> ToolBackends:
    return build_sql_backends(settings.estate_database_url)
