"""Configuration: YAML loading and validation, paths, the appservice registration.

Knows nothing of the bridge, the ACP client or the store.
"""

from .loader import ConfigError, load
from .model import AgentConfig, Config
from .paths import config_hash, data_dir, default_config_path, user_config_root, write_private
from .registration import Registration

__all__ = [
    "AgentConfig",
    "Config",
    "ConfigError",
    "Registration",
    "config_hash",
    "data_dir",
    "default_config_path",
    "load",
    "user_config_root",
    "write_private",
]
