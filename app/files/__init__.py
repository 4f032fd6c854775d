"""Uploaded files (task attachments): direct upload, the SDK's presigned flow, expiry."""
