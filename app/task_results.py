"""A task as the API shows it (a poll, a page of the list, a window's task, a recording): the response schemas."""
import marshmallow as ma
from marshmallow import fields

STATUSES = ("pending", "success", "error", "input-required")


class OutputSchema(ma.Schema):
    type = fields.String(required=True, metadata={"enum": ["text", "structured"]})
    content = fields.Raw(required=True)


class TakeoverSchema(ma.Schema):
    by = fields.String(metadata={"description": "Who had control (the name of the key that opened the live view)"})
    events = fields.Integer(metadata={"description": "How many inputs they made (each an entry that follows)"})


class CompletionCheckSchema(ma.Schema):
    done = fields.Boolean(metadata={"description": "Was the task done, as the check judged"})
    reason = fields.String(metadata={"description": "Why (the model's words, or the built-in rule's)"})
    by = fields.String(metadata={"enum": ["model", "rules"], "description": "Who judged: the model's "
                                 "constrained check, or the built-in rules"})
    tokens = fields.Integer(metadata={"description": "The model tokens the check took (counted in usage)"})


class TraceEntrySchema(ma.Schema):
    url = fields.String()
    action = fields.String()
    credits = fields.Float()
    startTs = fields.String()
    endTs = fields.String()
    durationMs = fields.Integer()
    result = fields.String(metadata={"description": "MCP tool calls: the tool's result, truncated"})
    target = fields.String(metadata={
        "description": "Browser steps on an element: the element as the page view showed it (`[3] <button> Send`)"})
    failed = fields.Boolean(metadata={"description": "The action did not do what it should; `error` says why"})
    error = fields.String(metadata={"description": "Why the action failed"})
    browserSession = fields.String(metadata={
        "description": "Browser modes: the session that ran the action "
                       "(cloudBrowserSessionName, or task-<requestId>)"})
    refused = fields.List(fields.String(), metadata={
        "description": "Browser steps: what the egress policy refused meanwhile (\"GET host:port: why\")"})
    waited = fields.String(metadata={
        "description": "A step that used `${code:TO}` or `${link:TO}`: how long it waited for it (\"waited 41 s "
                       "for a code to ada@example.test\")"})
    running = fields.Boolean(metadata={
        "description": "Progress only: a `wait` step still running (replaced by its entry when it ends)"})
    planner = fields.String(metadata={
        "description": "The final entry: which planner ran the task, `builtin` (the step grammar) or "
                       "`model <LLM_MODEL>`"})
    check = fields.Nested(CompletionCheckSchema, metadata={
        "description": "Web tasks that name a page: the completion check's verdict (its own entry when a model "
                       "judged or the trace showed what is missing; the final entry carries the latest)"})
    replayed = fields.Boolean(metadata={
        "description": "Replays: true for a step run from the script, false for one the model planned (healed)"})
    takeover = fields.Nested(TakeoverSchema, metadata={
        "description": "Live view: a person had control (who, and how many inputs); the entry's times say when "
                       "and how long"})
    by = fields.String(metadata={"description": "Live view: the person whose input this entry records"})


class StoredFileSchema(ma.Schema):
    key = fields.String(required=True, metadata={"description": "Pass as attachments[].key when submitting; "
                                                                "GET /fast/v2/files/{key} returns the bytes"})
    filename = fields.String(required=True)
    size = fields.Integer(required=True, metadata={"description": "Bytes"})
    contentType = fields.String(required=True)


class ResponseSchema(ma.Schema):
    output = fields.Nested(OutputSchema)
    actionTrace = fields.List(fields.Nested(TraceEntrySchema), allow_none=True)
    files = fields.List(fields.Nested(StoredFileSchema), metadata={
        "description": "Browser modes: the files the task's browser downloaded, now files of the key "
                       "(GET /fast/v2/files/{key}; an `attachments` item of a later task). Absent when it "
                       "downloaded none; one over a cap is left out, with an actionTrace entry that says so"})
    text = fields.String(metadata={"deprecated": True})
    structuredOutput = fields.Raw(allow_none=True, metadata={"deprecated": True})


class UsageSchema(ma.Schema):
    actions = fields.Integer()
    credits = fields.Float()


class ReplayInfoSchema(ma.Schema):
    replayOf = fields.String()
    scriptId = fields.String()
    version = fields.Integer(metadata={"description": "The version of the script replayed"})
    healed = fields.List(fields.Integer(), metadata={
        "description": "Steps (from 1) the model planned because the script's step could not run"})
    newVersion = fields.Integer(allow_none=True, metadata={
        "description": "The script version this healed run yielded (GET .../script)"})


class TaskResultSchema(ma.Schema):
    requestId = fields.String(required=True)
    status = fields.String(required=True, metadata={"enum": list(STATUSES)})
    browserWindowId = fields.String(allow_none=True)
    executionMode = fields.String()
    response = fields.Nested(ResponseSchema, allow_none=True)
    createdAt = fields.String(required=True)
    completedAt = fields.String(allow_none=True)
    usage = fields.Nested(UsageSchema, allow_none=True)
    hitlInputMetadata = fields.Dict(allow_none=True, metadata={
        "description": "While input-required: the question ({inputId, action}) to answer through .../input, or, "
                       "with type 'arrival', the one-time code or sign-in link the task waits for ({type, kind, to, "
                       "waitingSince, waitingUntil}), which resumes it when it arrives (POST /fast/v2/codes)."})
    trigger = fields.String(metadata={"enum": ["api", "schedule"], "description": "What submitted the task"})
    scheduleId = fields.String(allow_none=True, metadata={"description": "The schedule whose run this is"})
    progress = fields.Dict(allow_none=True, metadata={
        "description": "While pending: the actions taken so far."})
    replay = fields.Nested(ReplayInfoSchema, allow_none=True, metadata={
        "description": "Replays (replayOf, script or scriptId): which script version ran and which steps healed"})
    gifUrl = fields.String(allow_none=True, metadata={
        "description": "With generateGif: where to fetch the task's animated GIF (GET, same API key); "
                       "null while there is none yet (it is stored when the browser closes)."})


class RecordingMarkerSchema(ma.Schema):
    step = fields.Integer(metadata={"description": "The actionTrace entry's index"})
    action = fields.String(metadata={"description": "The action's name (go_to, click, type ...)"})
    offsetMs = fields.Integer(metadata={"description": "When the action started, from the recording's start"})


class RecordingSchema(ma.Schema):
    requestId = fields.String(required=True)
    format = fields.String(required=True, metadata={"enum": ["rrweb"], "description": (
        "rrweb 2 events: play them with rrweb-player (as the console does) or rrweb's Replayer")})
    startedAt = fields.Integer(metadata={"description": "The first event's time (ms since the epoch)"})
    durationMs = fields.Integer()
    truncated = fields.Boolean(metadata={"description": (
        "true: the run's events reached RECORDING_MAX_BYTES and the recording ends there (a custom event tagged "
        "\"truncated\" marks the moment)")})
    markers = fields.List(fields.Nested(RecordingMarkerSchema), metadata={
        "description": "One per browser action, at the moment it started (the worker's own: pages cannot add any)"})
    events = fields.List(fields.Dict(), metadata={"description": "The rrweb events, in time order"})
