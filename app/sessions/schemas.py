"""Request and response schemas of the cloud browser session endpoints (the narada SDK's shapes)."""
import marshmallow as ma
from flask import current_app
from marshmallow import ValidationError, fields, pre_load, validate, validates

from ..browser_options import BrowserSettingsSchema, ProfileOptionSchema, ProxySchema
from ..schema_base import LenientSchema, StrictBoolean

STOP_STATUSES = ("complete", "terminated", "failed", "timed_out")


class CreateSessionSchema(LenientSchema):
    require_extension = StrictBoolean(load_default=False, allow_none=True, metadata={
        "description": "Sessions are driven by the service, with no extension. With CDP access, `true` (as the narada "
                       "SDK's CloudBrowserEnvironment sends) shows its Playwright a stand-in for the Narada side "
                       "panel, whose reload (the SDK's reset_agent_state) cancels the session's tasks."})
    session_name = fields.String(allow_none=True, validate=validate.Length(max=200))
    session_timeout = fields.Integer(strict=True, allow_none=True, metadata={
        "description": "Idle limit in seconds (default CLOUD_SESSION_TIMEOUT_SECONDS)."})
    profile = fields.Nested(ProfileOptionSchema, allow_none=True, metadata={
        "description": "Start the browser with this named profile of the key; with `persist` the browser's state when "
                       "the session ends (stop, idle timeout) replaces it (docs/profiles.md)."})
    proxy = fields.Nested(ProxySchema, allow_none=True, metadata={
        "description": "The session's browser leaves through this proxy for the session's whole life, behind the "
                       "service's egress proxy (as a cloud_browser task's `proxy`)"})
    browser_settings = fields.Nested(BrowserSettingsSchema, allow_none=True, metadata={
        "description": "The identity the session's browser shows sites for its whole life, as a cloud_browser "
                       "task's `browserSettings` (also accepted under that name); its `timeZone` is the browser's "
                       "(default America/Los_Angeles). A session with settings gets a browser started for it"})

    @pre_load
    def _task_name(self, data, **_):
        """`browserSettings`, as a task names it, is taken for browser_settings."""
        if isinstance(data, dict) and "browserSettings" in data and "browser_settings" not in data:
            data = {**data, "browser_settings": data["browserSettings"]}
            del data["browserSettings"]
        return data

    @validates("session_timeout")
    def _within_limits(self, value, **_):
        if value is None:
            return
        most = current_app.config["CLOUD_SESSION_MAX_TIMEOUT_SECONDS"]
        if not 1 <= value <= most:
            raise ValidationError(f"session_timeout must be between 1 and {most} seconds.")


class SessionCreatedSchema(ma.Schema):
    browser_window_id = fields.String(required=True, metadata={"description": "Send as browserWindowId"})
    session_id = fields.String(required=True, metadata={"description": "Send as cloudBrowserSessionId"})


class CdpSessionCreatedSchema(ma.Schema):
    cdp_websocket_url = fields.String(required=True)
    session_id = fields.String(required=True)
    login_url = fields.String(required=True)
    cdp_auth_headers = fields.Dict(keys=fields.String(), values=fields.String(), required=True)
    browser_window_id = fields.String(required=True)


class StopSessionSchema(LenientSchema):
    session_id = fields.String(required=True, validate=validate.Length(min=1, max=64))
    status = fields.String(load_default="complete", allow_none=True, validate=validate.OneOf(STOP_STATUSES))


class StopResultSchema(ma.Schema):
    success = fields.Boolean(required=True)
    message = fields.String(required=True)


class SessionQuerySchema(LenientSchema):
    session_id = fields.String(required=True, validate=validate.Length(min=1, max=64))


class DownloadQuerySchema(SessionQuerySchema):
    key = fields.String(required=True, validate=validate.Length(min=1, max=500))


class DownloadedFileSchema(ma.Schema):
    key = fields.String(required=True)
    file_name = fields.String(required=True)
    size = fields.Integer(required=True)


class DownloadsSchema(ma.Schema):
    session_id = fields.String(required=True)
    downloaded_files = fields.List(fields.Nested(DownloadedFileSchema), required=True)


class DownloadUrlSchema(ma.Schema):
    presigned_url = fields.String(required=True, metadata={"description": "GET it with no API key"})
    expires_in = fields.Integer(required=True)


class PackageConfigSchema(ma.Schema):
    min_required_version = fields.String(required=True)


class SdkConfigSchema(ma.Schema):
    packages = fields.Dict(keys=fields.String(), values=fields.Nested(PackageConfigSchema), required=True)


class CdpHeadersRequestSchema(LenientSchema):
    cdp_websocket_url = fields.String(required=True, validate=validate.Length(min=1, max=2000))


class CdpHeadersSchema(ma.Schema):
    auth_headers = fields.Dict(keys=fields.String(), values=fields.String(), required=True)
    cloud_browser_session_id = fields.String(required=True)
