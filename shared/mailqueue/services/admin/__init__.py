"""Queue administration (issue 7): the service behind the admin API and the CLI.

Postfix's postqueue/postsuper/postcat/qshape and James's distributed mail queue API, on
the storage's own primitives: browse and size from the by_state index, operator actions
as conditional transitions under the delivery lease, bulk actions as resumable jobs.
"""

from __future__ import annotations

from mailqueue.services.admin.api import AdminApi, Reply
from mailqueue.services.admin.filters import QueueFilter, parse_filter
from mailqueue.services.admin.jobs import InlineLauncher, Job, JobLauncher, NullLauncher
from mailqueue.services.admin.service import (
    Action,
    AdminSettings,
    Busy,
    OpContext,
    Outcome,
    QueueAdmin,
    admin_settings_from_env,
)

__all__ = [
    "Action",
    "AdminApi",
    "AdminSettings",
    "Busy",
    "InlineLauncher",
    "Job",
    "JobLauncher",
    "NullLauncher",
    "OpContext",
    "Outcome",
    "QueueAdmin",
    "QueueFilter",
    "Reply",
    "admin_settings_from_env",
    "parse_filter",
]
