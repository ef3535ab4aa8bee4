"""Evidence: object storage with revisions, authorised access, safe display, thumbnails
(R17–R22). The execution core calls ``archive_evidence`` before and ``record_evidence`` inside
its completion transaction; readers go through ``fetch_evidence_for`` / ``presign``."""

from geo_pipeline.evidence.access import (
    EvidenceAccessDenied,
    EvidenceNotFound,
    EvidenceObject,
    fetch_by_key,
    fetch_evidence_for,
    find_object,
    list_objects,
    presign,
)
from geo_pipeline.evidence.archive import (
    Archive,
    ArchiveError,
    ArchiveUnavailable,
    DigestMismatch,
    LocalArchive,
    ObjectConflict,
    ObjectMissing,
    PresignUnsupported,
    S3Archive,
    archive_from_s3_resource,
    s3_archive_from_client,
)
from geo_pipeline.evidence.backend import archive_from_url
from geo_pipeline.evidence.recording import (
    ArchivedEvidence,
    ArchivedScreenshot,
    EvidenceOutcome,
    SampleRef,
    archive_evidence,
    archive_screenshot,
    record_evidence,
    record_screenshot,
)

__all__ = [
    "Archive",
    "ArchiveError",
    "ArchiveUnavailable",
    "ArchivedEvidence",
    "ArchivedScreenshot",
    "DigestMismatch",
    "EvidenceAccessDenied",
    "EvidenceNotFound",
    "EvidenceObject",
    "EvidenceOutcome",
    "LocalArchive",
    "ObjectConflict",
    "ObjectMissing",
    "PresignUnsupported",
    "S3Archive",
    "SampleRef",
    "archive_evidence",
    "archive_from_s3_resource",
    "archive_from_url",
    "archive_screenshot",
    "fetch_by_key",
    "fetch_evidence_for",
    "find_object",
    "list_objects",
    "presign",
    "record_evidence",
    "record_screenshot",
    "s3_archive_from_client",
]
