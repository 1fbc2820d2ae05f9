"""Operating a workspace: backup and restore (export/import and db copy come next)."""

from amelio.ops.backup import (
    BackupFile,
    BackupReport,
    Manifest,
    RestoreReport,
    backup_workspace,
    read_manifest,
    restore_workspace,
)

__all__ = [
    "BackupFile",
    "BackupReport",
    "Manifest",
    "RestoreReport",
    "backup_workspace",
    "read_manifest",
    "restore_workspace",
]
