"""Keys, permissions, scope confinement and the authorization interceptor.

Pure types here are shared by ``brain.server`` and ``brain.clients``.
"""

from ._cli import CommandParser, add_version_argument, package_version
from ._keys import (
    PREFIX,
    MalformedKey,
    ParsedKey,
    format_key,
    hash_secret,
    new_key_id,
    new_secret,
    parse_key,
    verify_secret,
)
from ._permissions import (
    ALL_PERMISSIONS,
    DEFAULT_PERMISSIONS,
    METHOD_CLASSES,
    REQUIRED_PERMISSION,
    MethodClass,
    Permission,
    allowed_methods,
    parse_permissions,
)
from ._principal import Caller, KeyRecord, KeyStoreUnavailable, caller, current_caller
from ._ratelimit import Limiter, RateLimiter, SharedRateLimiter
from ._scope import (
    Confinement,
    NestedScope,
    RequestScope,
    ScopeViolation,
    check_scope,
    is_valid_name,
)

__all__ = [
    "ALL_PERMISSIONS",
    "DEFAULT_PERMISSIONS",
    "METHOD_CLASSES",
    "PREFIX",
    "REQUIRED_PERMISSION",
    "Caller",
    "CommandParser",
    "Confinement",
    "KeyRecord",
    "KeyStoreUnavailable",
    "Limiter",
    "MalformedKey",
    "MethodClass",
    "NestedScope",
    "ParsedKey",
    "Permission",
    "RateLimiter",
    "RequestScope",
    "ScopeViolation",
    "SharedRateLimiter",
    "add_version_argument",
    "allowed_methods",
    "caller",
    "check_scope",
    "current_caller",
    "format_key",
    "hash_secret",
    "is_valid_name",
    "new_key_id",
    "new_secret",
    "package_version",
    "parse_key",
    "parse_permissions",
    "verify_secret",
]
