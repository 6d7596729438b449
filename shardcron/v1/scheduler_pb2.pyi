from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CatchUp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CATCH_UP_UNSPECIFIED: _ClassVar[CatchUp]
    CATCH_UP_ALL: _ClassVar[CatchUp]
    CATCH_UP_LATEST: _ClassVar[CatchUp]
    CATCH_UP_NONE: _ClassVar[CatchUp]

class Overlap(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERLAP_UNSPECIFIED: _ClassVar[Overlap]
    OVERLAP_SKIP: _ClassVar[Overlap]
    OVERLAP_ALLOW: _ClassVar[Overlap]

class BackfillState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKFILL_STATE_UNSPECIFIED: _ClassVar[BackfillState]
    BACKFILL_STATE_ACTIVE: _ClassVar[BackfillState]
    BACKFILL_STATE_DONE: _ClassVar[BackfillState]
    BACKFILL_STATE_FAILED: _ClassVar[BackfillState]

class TickStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TICK_STATUS_UNSPECIFIED: _ClassVar[TickStatus]
    TICK_STATUS_CLAIMED: _ClassVar[TickStatus]
    TICK_STATUS_RUNNING: _ClassVar[TickStatus]
    TICK_STATUS_SUCCEEDED: _ClassVar[TickStatus]
    TICK_STATUS_FAILED: _ClassVar[TickStatus]
    TICK_STATUS_SKIPPED: _ClassVar[TickStatus]
    TICK_STATUS_ABANDONED: _ClassVar[TickStatus]
CATCH_UP_UNSPECIFIED: CatchUp
CATCH_UP_ALL: CatchUp
CATCH_UP_LATEST: CatchUp
CATCH_UP_NONE: CatchUp
OVERLAP_UNSPECIFIED: Overlap
OVERLAP_SKIP: Overlap
OVERLAP_ALLOW: Overlap
BACKFILL_STATE_UNSPECIFIED: BackfillState
BACKFILL_STATE_ACTIVE: BackfillState
BACKFILL_STATE_DONE: BackfillState
BACKFILL_STATE_FAILED: BackfillState
TICK_STATUS_UNSPECIFIED: TickStatus
TICK_STATUS_CLAIMED: TickStatus
TICK_STATUS_RUNNING: TickStatus
TICK_STATUS_SUCCEEDED: TickStatus
TICK_STATUS_FAILED: TickStatus
TICK_STATUS_SKIPPED: TickStatus
TICK_STATUS_ABANDONED: TickStatus

class Schedule(_message.Message):
    __slots__ = ("cron", "interval_ms", "at_ms", "timezone")
    CRON_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    cron: str
    interval_ms: int
    at_ms: int
    timezone: str
    def __init__(self, cron: _Optional[str] = ..., interval_ms: _Optional[int] = ..., at_ms: _Optional[int] = ..., timezone: _Optional[str] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class HttpExecutor(_message.Message):
    __slots__ = ("url", "method", "headers", "body", "secret_headers")
    URL_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    SECRET_HEADERS_FIELD_NUMBER: _ClassVar[int]
    url: str
    method: str
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    body: str
    secret_headers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, url: _Optional[str] = ..., method: _Optional[str] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., body: _Optional[str] = ..., secret_headers: _Optional[_Iterable[str]] = ...) -> None: ...

class ShellExecutor(_message.Message):
    __slots__ = ("command",)
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    command: str
    def __init__(self, command: _Optional[str] = ...) -> None: ...

class NoopExecutor(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CeleryExecutor(_message.Message):
    __slots__ = ("url", "task", "args_json", "kwargs_json", "queue", "routing_key", "priority", "expires_ms")
    URL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    url: str
    task: str
    args_json: str
    kwargs_json: str
    queue: str
    routing_key: str
    priority: int
    expires_ms: int
    def __init__(self, url: _Optional[str] = ..., task: _Optional[str] = ..., args_json: _Optional[str] = ..., kwargs_json: _Optional[str] = ..., queue: _Optional[str] = ..., routing_key: _Optional[str] = ..., priority: _Optional[int] = ..., expires_ms: _Optional[int] = ...) -> None: ...

class RqExecutor(_message.Message):
    __slots__ = ("url", "func", "queue", "args_json", "kwargs_json")
    URL_FIELD_NUMBER: _ClassVar[int]
    FUNC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    url: str
    func: str
    queue: str
    args_json: str
    kwargs_json: str
    def __init__(self, url: _Optional[str] = ..., func: _Optional[str] = ..., queue: _Optional[str] = ..., args_json: _Optional[str] = ..., kwargs_json: _Optional[str] = ...) -> None: ...

class ArqExecutor(_message.Message):
    __slots__ = ("url", "function", "queue", "args_json", "kwargs_json", "tick_kwarg")
    URL_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    TICK_KWARG_FIELD_NUMBER: _ClassVar[int]
    url: str
    function: str
    queue: str
    args_json: str
    kwargs_json: str
    tick_kwarg: str
    def __init__(self, url: _Optional[str] = ..., function: _Optional[str] = ..., queue: _Optional[str] = ..., args_json: _Optional[str] = ..., kwargs_json: _Optional[str] = ..., tick_kwarg: _Optional[str] = ...) -> None: ...

class NatsExecutor(_message.Message):
    __slots__ = ("url", "subject", "jetstream", "body", "headers")
    URL_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    JETSTREAM_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    url: str
    subject: str
    jetstream: bool
    body: str
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    def __init__(self, url: _Optional[str] = ..., subject: _Optional[str] = ..., jetstream: _Optional[bool] = ..., body: _Optional[str] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ...) -> None: ...

class AmqpExecutor(_message.Message):
    __slots__ = ("url", "exchange", "routing_key", "body", "headers", "persistent", "content_type")
    URL_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    url: str
    exchange: str
    routing_key: str
    body: str
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    persistent: bool
    content_type: str
    def __init__(self, url: _Optional[str] = ..., exchange: _Optional[str] = ..., routing_key: _Optional[str] = ..., body: _Optional[str] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., persistent: _Optional[bool] = ..., content_type: _Optional[str] = ...) -> None: ...

class RedisStreamExecutor(_message.Message):
    __slots__ = ("url", "stream", "fields", "maxlen", "dedupe_ttl_ms")
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    URL_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    MAXLEN_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    url: str
    stream: str
    fields: _containers.ScalarMap[str, str]
    maxlen: int
    dedupe_ttl_ms: int
    def __init__(self, url: _Optional[str] = ..., stream: _Optional[str] = ..., fields: _Optional[_Mapping[str, str]] = ..., maxlen: _Optional[int] = ..., dedupe_ttl_ms: _Optional[int] = ...) -> None: ...

class PythonExecutor(_message.Message):
    __slots__ = ("target", "args_json", "kwargs_json", "session")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    target: str
    args_json: str
    kwargs_json: str
    session: bool
    def __init__(self, target: _Optional[str] = ..., args_json: _Optional[str] = ..., kwargs_json: _Optional[str] = ..., session: _Optional[bool] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "backoff_initial_ms", "backoff_max_ms")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_INITIAL_MS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MAX_MS_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    backoff_initial_ms: int
    backoff_max_ms: int
    def __init__(self, max_attempts: _Optional[int] = ..., backoff_initial_ms: _Optional[int] = ..., backoff_max_ms: _Optional[int] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "schedule", "http", "shell", "noop", "celery", "rq", "arq", "nats", "amqp", "redis_stream", "python", "catchup", "catchup_window_ms", "overlap", "timeout_ms", "retry", "paused", "labels", "version", "active_since_ms", "jitter_ms", "runs", "calendars", "history_limit", "on_failure", "on_recovery", "namespace", "start_deadline_ms", "deadline_ms", "heartbeat_ms", "on_deadline")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    HTTP_FIELD_NUMBER: _ClassVar[int]
    SHELL_FIELD_NUMBER: _ClassVar[int]
    NOOP_FIELD_NUMBER: _ClassVar[int]
    CELERY_FIELD_NUMBER: _ClassVar[int]
    RQ_FIELD_NUMBER: _ClassVar[int]
    ARQ_FIELD_NUMBER: _ClassVar[int]
    NATS_FIELD_NUMBER: _ClassVar[int]
    AMQP_FIELD_NUMBER: _ClassVar[int]
    REDIS_STREAM_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    JITTER_MS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    CALENDARS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    ON_RECOVERY_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    START_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    ON_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    id: str
    schedule: Schedule
    http: HttpExecutor
    shell: ShellExecutor
    noop: NoopExecutor
    celery: CeleryExecutor
    rq: RqExecutor
    arq: ArqExecutor
    nats: NatsExecutor
    amqp: AmqpExecutor
    redis_stream: RedisStreamExecutor
    python: PythonExecutor
    catchup: CatchUp
    catchup_window_ms: int
    overlap: Overlap
    timeout_ms: int
    retry: RetryPolicy
    paused: bool
    labels: _containers.ScalarMap[str, str]
    version: int
    active_since_ms: int
    jitter_ms: int
    runs: JobRuns
    calendars: _containers.RepeatedScalarFieldContainer[str]
    history_limit: int
    on_failure: Notification
    on_recovery: Notification
    namespace: str
    start_deadline_ms: int
    deadline_ms: int
    heartbeat_ms: int
    on_deadline: Notification
    def __init__(self, id: _Optional[str] = ..., schedule: _Optional[_Union[Schedule, _Mapping]] = ..., http: _Optional[_Union[HttpExecutor, _Mapping]] = ..., shell: _Optional[_Union[ShellExecutor, _Mapping]] = ..., noop: _Optional[_Union[NoopExecutor, _Mapping]] = ..., celery: _Optional[_Union[CeleryExecutor, _Mapping]] = ..., rq: _Optional[_Union[RqExecutor, _Mapping]] = ..., arq: _Optional[_Union[ArqExecutor, _Mapping]] = ..., nats: _Optional[_Union[NatsExecutor, _Mapping]] = ..., amqp: _Optional[_Union[AmqpExecutor, _Mapping]] = ..., redis_stream: _Optional[_Union[RedisStreamExecutor, _Mapping]] = ..., python: _Optional[_Union[PythonExecutor, _Mapping]] = ..., catchup: _Optional[_Union[CatchUp, str]] = ..., catchup_window_ms: _Optional[int] = ..., overlap: _Optional[_Union[Overlap, str]] = ..., timeout_ms: _Optional[int] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., paused: _Optional[bool] = ..., labels: _Optional[_Mapping[str, str]] = ..., version: _Optional[int] = ..., active_since_ms: _Optional[int] = ..., jitter_ms: _Optional[int] = ..., runs: _Optional[_Union[JobRuns, _Mapping]] = ..., calendars: _Optional[_Iterable[str]] = ..., history_limit: _Optional[int] = ..., on_failure: _Optional[_Union[Notification, _Mapping]] = ..., on_recovery: _Optional[_Union[Notification, _Mapping]] = ..., namespace: _Optional[str] = ..., start_deadline_ms: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., heartbeat_ms: _Optional[int] = ..., on_deadline: _Optional[_Union[Notification, _Mapping]] = ...) -> None: ...

class Notification(_message.Message):
    __slots__ = ("http", "shell", "noop", "celery", "rq", "arq", "nats", "amqp", "redis_stream", "python")
    HTTP_FIELD_NUMBER: _ClassVar[int]
    SHELL_FIELD_NUMBER: _ClassVar[int]
    NOOP_FIELD_NUMBER: _ClassVar[int]
    CELERY_FIELD_NUMBER: _ClassVar[int]
    RQ_FIELD_NUMBER: _ClassVar[int]
    ARQ_FIELD_NUMBER: _ClassVar[int]
    NATS_FIELD_NUMBER: _ClassVar[int]
    AMQP_FIELD_NUMBER: _ClassVar[int]
    REDIS_STREAM_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FIELD_NUMBER: _ClassVar[int]
    http: HttpExecutor
    shell: ShellExecutor
    noop: NoopExecutor
    celery: CeleryExecutor
    rq: RqExecutor
    arq: ArqExecutor
    nats: NatsExecutor
    amqp: AmqpExecutor
    redis_stream: RedisStreamExecutor
    python: PythonExecutor
    def __init__(self, http: _Optional[_Union[HttpExecutor, _Mapping]] = ..., shell: _Optional[_Union[ShellExecutor, _Mapping]] = ..., noop: _Optional[_Union[NoopExecutor, _Mapping]] = ..., celery: _Optional[_Union[CeleryExecutor, _Mapping]] = ..., rq: _Optional[_Union[RqExecutor, _Mapping]] = ..., arq: _Optional[_Union[ArqExecutor, _Mapping]] = ..., nats: _Optional[_Union[NatsExecutor, _Mapping]] = ..., amqp: _Optional[_Union[AmqpExecutor, _Mapping]] = ..., redis_stream: _Optional[_Union[RedisStreamExecutor, _Mapping]] = ..., python: _Optional[_Union[PythonExecutor, _Mapping]] = ...) -> None: ...

class JobRuns(_message.Message):
    __slots__ = ("as_of_ms", "next_slot_ms", "next_start_ms", "last_scheduled_at_ms", "last_status", "failures_in_a_row", "next_reason", "last_missed_deadlines")
    AS_OF_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_SLOT_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_START_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_SCHEDULED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_IN_A_ROW_FIELD_NUMBER: _ClassVar[int]
    NEXT_REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_MISSED_DEADLINES_FIELD_NUMBER: _ClassVar[int]
    as_of_ms: int
    next_slot_ms: int
    next_start_ms: int
    last_scheduled_at_ms: int
    last_status: TickStatus
    failures_in_a_row: int
    next_reason: str
    last_missed_deadlines: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, as_of_ms: _Optional[int] = ..., next_slot_ms: _Optional[int] = ..., next_start_ms: _Optional[int] = ..., last_scheduled_at_ms: _Optional[int] = ..., last_status: _Optional[_Union[TickStatus, str]] = ..., failures_in_a_row: _Optional[int] = ..., next_reason: _Optional[str] = ..., last_missed_deadlines: _Optional[_Iterable[str]] = ...) -> None: ...

class PutJobRequest(_message.Message):
    __slots__ = ("job", "expected_version")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    job: Job
    expected_version: int
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class PutJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class PutJobEachRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[PutJobRequest]
    def __init__(self, calls: _Optional[_Iterable[_Union[PutJobRequest, _Mapping]]] = ...) -> None: ...

class PutJobOutcome(_message.Message):
    __slots__ = ("code", "message", "job", "retry")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    job: Job
    retry: bool
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., retry: _Optional[bool] = ...) -> None: ...

class PutJobEachResponse(_message.Message):
    __slots__ = ("outcomes", "node")
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[PutJobOutcome]
    node: str
    def __init__(self, outcomes: _Optional[_Iterable[_Union[PutJobOutcome, _Mapping]]] = ..., node: _Optional[str] = ...) -> None: ...

class PutJobsRequest(_message.Message):
    __slots__ = ("jobs", "validate_only")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    validate_only: bool
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class PutJobResult(_message.Message):
    __slots__ = ("id", "code", "message", "job", "retryable", "unchanged")
    ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    id: str
    code: int
    message: str
    job: Job
    retryable: bool
    unchanged: bool
    def __init__(self, id: _Optional[str] = ..., code: _Optional[int] = ..., message: _Optional[str] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., retryable: _Optional[bool] = ..., unchanged: _Optional[bool] = ...) -> None: ...

class PutJobsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[PutJobResult]
    def __init__(self, results: _Optional[_Iterable[_Union[PutJobResult, _Mapping]]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("id", "namespace")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    def __init__(self, id: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ("id", "namespace")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    def __init__(self, id: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "labels", "shard", "namespace", "id_prefix", "paused")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    labels: _containers.ScalarMap[str, str]
    shard: int
    namespace: str
    id_prefix: str
    paused: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., shard: _Optional[int] = ..., namespace: _Optional[str] = ..., id_prefix: _Optional[str] = ..., paused: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PauseJobRequest(_message.Message):
    __slots__ = ("id", "namespace")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    def __init__(self, id: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class PauseJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class ResumeJobRequest(_message.Message):
    __slots__ = ("id", "namespace")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    def __init__(self, id: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class ResumeJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class TriggerJobRequest(_message.Message):
    __slots__ = ("id", "namespace")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    def __init__(self, id: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class TriggerJobResponse(_message.Message):
    __slots__ = ("id", "scheduled_at_ms", "shard", "namespace")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    scheduled_at_ms: int
    shard: int
    namespace: str
    def __init__(self, id: _Optional[str] = ..., scheduled_at_ms: _Optional[int] = ..., shard: _Optional[int] = ..., namespace: _Optional[str] = ...) -> None: ...

class AckTickRequest(_message.Message):
    __slots__ = ("id", "namespace", "scheduled_at_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    scheduled_at_ms: int
    def __init__(self, id: _Optional[str] = ..., namespace: _Optional[str] = ..., scheduled_at_ms: _Optional[int] = ...) -> None: ...

class AckTickResponse(_message.Message):
    __slots__ = ("id", "namespace", "scheduled_at_ms", "acked_at_ms", "already")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ACKED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ALREADY_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    scheduled_at_ms: int
    acked_at_ms: int
    already: bool
    def __init__(self, id: _Optional[str] = ..., namespace: _Optional[str] = ..., scheduled_at_ms: _Optional[int] = ..., acked_at_ms: _Optional[int] = ..., already: _Optional[bool] = ...) -> None: ...

class BackfillJobRequest(_message.Message):
    __slots__ = ("id", "from_ms", "to_ms", "overlap", "rate_per_s", "namespace")
    ID_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_S_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    from_ms: int
    to_ms: int
    overlap: Overlap
    rate_per_s: float
    namespace: str
    def __init__(self, id: _Optional[str] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ..., overlap: _Optional[_Union[Overlap, str]] = ..., rate_per_s: _Optional[float] = ..., namespace: _Optional[str] = ...) -> None: ...

class BackfillJobResponse(_message.Message):
    __slots__ = ("backfill",)
    BACKFILL_FIELD_NUMBER: _ClassVar[int]
    backfill: Backfill
    def __init__(self, backfill: _Optional[_Union[Backfill, _Mapping]] = ...) -> None: ...

class Backfill(_message.Message):
    __slots__ = ("id", "job_id", "shard", "from_ms", "to_ms", "overlap", "rate_per_s", "state", "planned", "done", "skipped", "cursor_ms", "created_at_ms", "updated_at_ms", "node_id", "error", "namespace")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_S_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PLANNED_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    CURSOR_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    job_id: str
    shard: int
    from_ms: int
    to_ms: int
    overlap: Overlap
    rate_per_s: float
    state: BackfillState
    planned: int
    done: int
    skipped: int
    cursor_ms: int
    created_at_ms: int
    updated_at_ms: int
    node_id: str
    error: str
    namespace: str
    def __init__(self, id: _Optional[str] = ..., job_id: _Optional[str] = ..., shard: _Optional[int] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ..., overlap: _Optional[_Union[Overlap, str]] = ..., rate_per_s: _Optional[float] = ..., state: _Optional[_Union[BackfillState, str]] = ..., planned: _Optional[int] = ..., done: _Optional[int] = ..., skipped: _Optional[int] = ..., cursor_ms: _Optional[int] = ..., created_at_ms: _Optional[int] = ..., updated_at_ms: _Optional[int] = ..., node_id: _Optional[str] = ..., error: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class GetBackfillRequest(_message.Message):
    __slots__ = ("id", "namespace")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    def __init__(self, id: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class GetBackfillResponse(_message.Message):
    __slots__ = ("backfill",)
    BACKFILL_FIELD_NUMBER: _ClassVar[int]
    backfill: Backfill
    def __init__(self, backfill: _Optional[_Union[Backfill, _Mapping]] = ...) -> None: ...

class ListBackfillsRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "namespace")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    namespace: str
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., namespace: _Optional[str] = ...) -> None: ...

class ListBackfillsResponse(_message.Message):
    __slots__ = ("backfills",)
    BACKFILLS_FIELD_NUMBER: _ClassVar[int]
    backfills: _containers.RepeatedCompositeFieldContainer[Backfill]
    def __init__(self, backfills: _Optional[_Iterable[_Union[Backfill, _Mapping]]] = ...) -> None: ...

class Tick(_message.Message):
    __slots__ = ("job_id", "scheduled_at_ms", "shard", "fence", "node_id", "status", "attempt", "manual", "claimed_at_ms", "started_at_ms", "finished_at_ms", "exit_code", "http_status", "output", "error", "namespace", "acked_at_ms", "missed_deadlines")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MANUAL_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ACKED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    MISSED_DEADLINES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    scheduled_at_ms: int
    shard: int
    fence: int
    node_id: str
    status: TickStatus
    attempt: int
    manual: bool
    claimed_at_ms: int
    started_at_ms: int
    finished_at_ms: int
    exit_code: int
    http_status: int
    output: str
    error: str
    namespace: str
    acked_at_ms: int
    missed_deadlines: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., scheduled_at_ms: _Optional[int] = ..., shard: _Optional[int] = ..., fence: _Optional[int] = ..., node_id: _Optional[str] = ..., status: _Optional[_Union[TickStatus, str]] = ..., attempt: _Optional[int] = ..., manual: _Optional[bool] = ..., claimed_at_ms: _Optional[int] = ..., started_at_ms: _Optional[int] = ..., finished_at_ms: _Optional[int] = ..., exit_code: _Optional[int] = ..., http_status: _Optional[int] = ..., output: _Optional[str] = ..., error: _Optional[str] = ..., namespace: _Optional[str] = ..., acked_at_ms: _Optional[int] = ..., missed_deadlines: _Optional[_Iterable[str]] = ...) -> None: ...

class ListTicksRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "page_token", "namespace")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    page_token: str
    namespace: str
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class ListTicksResponse(_message.Message):
    __slots__ = ("ticks", "next_page_token")
    TICKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ticks: _containers.RepeatedCompositeFieldContainer[Tick]
    next_page_token: str
    def __init__(self, ticks: _Optional[_Iterable[_Union[Tick, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListDeadlineMissesRequest(_message.Message):
    __slots__ = ("since_ms", "page_size", "namespace")
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    since_ms: int
    page_size: int
    namespace: str
    def __init__(self, since_ms: _Optional[int] = ..., page_size: _Optional[int] = ..., namespace: _Optional[str] = ...) -> None: ...

class DeadlineMiss(_message.Message):
    __slots__ = ("job_id", "namespace", "scheduled_at_ms", "kind", "missed_at_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MISSED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    namespace: str
    scheduled_at_ms: int
    kind: str
    missed_at_ms: int
    def __init__(self, job_id: _Optional[str] = ..., namespace: _Optional[str] = ..., scheduled_at_ms: _Optional[int] = ..., kind: _Optional[str] = ..., missed_at_ms: _Optional[int] = ...) -> None: ...

class ListDeadlineMissesResponse(_message.Message):
    __slots__ = ("misses",)
    MISSES_FIELD_NUMBER: _ClassVar[int]
    misses: _containers.RepeatedCompositeFieldContainer[DeadlineMiss]
    def __init__(self, misses: _Optional[_Iterable[_Union[DeadlineMiss, _Mapping]]] = ...) -> None: ...

class WatchTicksRequest(_message.Message):
    __slots__ = ("job_id", "local_only", "namespace")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    local_only: bool
    namespace: str
    def __init__(self, job_id: _Optional[str] = ..., local_only: _Optional[bool] = ..., namespace: _Optional[str] = ...) -> None: ...

class TickEvent(_message.Message):
    __slots__ = ("tick", "dropped")
    TICK_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    tick: Tick
    dropped: int
    def __init__(self, tick: _Optional[_Union[Tick, _Mapping]] = ..., dropped: _Optional[int] = ...) -> None: ...

class GetShardsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ShardInfo(_message.Message):
    __slots__ = ("shard", "leader", "address", "fence", "leader_since_ms", "candidates", "jobs", "state")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    LEADER_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    shard: int
    leader: str
    address: str
    fence: int
    leader_since_ms: int
    candidates: int
    jobs: int
    state: str
    def __init__(self, shard: _Optional[int] = ..., leader: _Optional[str] = ..., address: _Optional[str] = ..., fence: _Optional[int] = ..., leader_since_ms: _Optional[int] = ..., candidates: _Optional[int] = ..., jobs: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("node", "address", "started_at_ms", "leads", "fair_share", "draining")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LEADS_FIELD_NUMBER: _ClassVar[int]
    FAIR_SHARE_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    node: str
    address: str
    started_at_ms: int
    leads: int
    fair_share: str
    draining: bool
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., started_at_ms: _Optional[int] = ..., leads: _Optional[int] = ..., fair_share: _Optional[str] = ..., draining: _Optional[bool] = ...) -> None: ...

class Reshard(_message.Message):
    __slots__ = ("from_shards", "to_shards", "state", "requested_at_ms")
    FROM_SHARDS_FIELD_NUMBER: _ClassVar[int]
    TO_SHARDS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    from_shards: int
    to_shards: int
    state: str
    requested_at_ms: int
    def __init__(self, from_shards: _Optional[int] = ..., to_shards: _Optional[int] = ..., state: _Optional[str] = ..., requested_at_ms: _Optional[int] = ...) -> None: ...

class GetShardsResponse(_message.Message):
    __slots__ = ("prefix", "shard_count", "revision", "shards", "nodes", "reshard")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    SHARD_COUNT_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    RESHARD_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    shard_count: int
    revision: int
    shards: _containers.RepeatedCompositeFieldContainer[ShardInfo]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    reshard: Reshard
    def __init__(self, prefix: _Optional[str] = ..., shard_count: _Optional[int] = ..., revision: _Optional[int] = ..., shards: _Optional[_Iterable[_Union[ShardInfo, _Mapping]]] = ..., nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ..., reshard: _Optional[_Union[Reshard, _Mapping]] = ...) -> None: ...

class CalendarWindow(_message.Message):
    __slots__ = ("days", "start", "end")
    DAYS_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    days: str
    start: str
    end: str
    def __init__(self, days: _Optional[str] = ..., start: _Optional[str] = ..., end: _Optional[str] = ...) -> None: ...

class CalendarRange(_message.Message):
    __slots__ = ("from_ms", "to_ms")
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    from_ms: int
    to_ms: int
    def __init__(self, from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ...) -> None: ...

class Calendar(_message.Message):
    __slots__ = ("name", "timezone", "exclude_dates", "windows", "exclude_ranges", "ics", "version", "updated_at_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_DATES_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_RANGES_FIELD_NUMBER: _ClassVar[int]
    ICS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    timezone: str
    exclude_dates: _containers.RepeatedScalarFieldContainer[str]
    windows: _containers.RepeatedCompositeFieldContainer[CalendarWindow]
    exclude_ranges: _containers.RepeatedCompositeFieldContainer[CalendarRange]
    ics: str
    version: int
    updated_at_ms: int
    def __init__(self, name: _Optional[str] = ..., timezone: _Optional[str] = ..., exclude_dates: _Optional[_Iterable[str]] = ..., windows: _Optional[_Iterable[_Union[CalendarWindow, _Mapping]]] = ..., exclude_ranges: _Optional[_Iterable[_Union[CalendarRange, _Mapping]]] = ..., ics: _Optional[str] = ..., version: _Optional[int] = ..., updated_at_ms: _Optional[int] = ...) -> None: ...

class PutCalendarRequest(_message.Message):
    __slots__ = ("calendar", "expected_version")
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    calendar: Calendar
    expected_version: int
    def __init__(self, calendar: _Optional[_Union[Calendar, _Mapping]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class PutCalendarResponse(_message.Message):
    __slots__ = ("calendar",)
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    calendar: Calendar
    def __init__(self, calendar: _Optional[_Union[Calendar, _Mapping]] = ...) -> None: ...

class GetCalendarRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetCalendarResponse(_message.Message):
    __slots__ = ("calendar", "jobs", "job_namespaces")
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    JOB_NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    calendar: Calendar
    jobs: _containers.RepeatedScalarFieldContainer[str]
    job_namespaces: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, calendar: _Optional[_Union[Calendar, _Mapping]] = ..., jobs: _Optional[_Iterable[str]] = ..., job_namespaces: _Optional[_Iterable[str]] = ...) -> None: ...

class ListCalendarsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListCalendarsResponse(_message.Message):
    __slots__ = ("calendars",)
    CALENDARS_FIELD_NUMBER: _ClassVar[int]
    calendars: _containers.RepeatedCompositeFieldContainer[Calendar]
    def __init__(self, calendars: _Optional[_Iterable[_Union[Calendar, _Mapping]]] = ...) -> None: ...

class DeleteCalendarRequest(_message.Message):
    __slots__ = ("name", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteCalendarResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NamespaceQuota(_message.Message):
    __slots__ = ("max_jobs", "max_slots_per_second", "max_running")
    MAX_JOBS_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    max_jobs: int
    max_slots_per_second: str
    max_running: int
    def __init__(self, max_jobs: _Optional[int] = ..., max_slots_per_second: _Optional[str] = ..., max_running: _Optional[int] = ...) -> None: ...

class Namespace(_message.Message):
    __slots__ = ("name", "weight", "quota", "jobs", "slots_per_second", "created_at_ms", "updated_at_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    weight: float
    quota: NamespaceQuota
    jobs: int
    slots_per_second: str
    created_at_ms: int
    updated_at_ms: int
    def __init__(self, name: _Optional[str] = ..., weight: _Optional[float] = ..., quota: _Optional[_Union[NamespaceQuota, _Mapping]] = ..., jobs: _Optional[int] = ..., slots_per_second: _Optional[str] = ..., created_at_ms: _Optional[int] = ..., updated_at_ms: _Optional[int] = ...) -> None: ...

class ListNamespacesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListNamespacesResponse(_message.Message):
    __slots__ = ("namespaces",)
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedCompositeFieldContainer[Namespace]
    def __init__(self, namespaces: _Optional[_Iterable[_Union[Namespace, _Mapping]]] = ...) -> None: ...

class GetNamespaceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetNamespaceResponse(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ...) -> None: ...

class CreateNamespaceRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ...) -> None: ...

class CreateNamespaceResponse(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ...) -> None: ...

class UpdateNamespaceRequest(_message.Message):
    __slots__ = ("namespace", "quota_fields", "keep_quotas")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELDS_FIELD_NUMBER: _ClassVar[int]
    KEEP_QUOTAS_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    quota_fields: _containers.RepeatedScalarFieldContainer[str]
    keep_quotas: bool
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ..., quota_fields: _Optional[_Iterable[str]] = ..., keep_quotas: _Optional[bool] = ...) -> None: ...

class UpdateNamespaceResponse(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ...) -> None: ...

class DeleteNamespaceRequest(_message.Message):
    __slots__ = ("name", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteNamespaceResponse(_message.Message):
    __slots__ = ("jobs_deleted",)
    JOBS_DELETED_FIELD_NUMBER: _ClassVar[int]
    jobs_deleted: int
    def __init__(self, jobs_deleted: _Optional[int] = ...) -> None: ...

class ApiToken(_message.Message):
    __slots__ = ("name", "role", "namespaces", "created_at_ms", "created_by", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: str
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    created_at_ms: int
    created_by: str
    source: str
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ..., namespaces: _Optional[_Iterable[str]] = ..., created_at_ms: _Optional[int] = ..., created_by: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[ApiToken]
    def __init__(self, tokens: _Optional[_Iterable[_Union[ApiToken, _Mapping]]] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: ApiToken
    def __init__(self, token: _Optional[_Union[ApiToken, _Mapping]] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token", "secret")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    token: ApiToken
    secret: str
    def __init__(self, token: _Optional[_Union[ApiToken, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
