"""`monitoring.notifications`: where alerts go (webhooks) and how hard delivery tries.

A webhook's URL is a secret (a Slack/Mattermost incoming-webhook URL lets anyone post), so
the config names the environment variable that holds it (`url_env`) and the URL itself is
read only when a message is sent: it is never in the config, the database or the snapshot.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from oellm_autoexp.core.report.alerts import RETRY_BASE_S, AlertKind

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class WebhookSettings(BaseModel):
    """One receiver: an HTTP endpoint that takes a JSON POST."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)  # shown in logs and the delivery record instead of the URL
    url_env: str = Field(pattern=ENV_NAME)  # the environment variable that holds the URL
    # json: the whole alert record (generic receivers); text: {"text": ...} (Slack, Mattermost)
    format: Literal["json", "text"] = "json"
    events: tuple[AlertKind, ...] = tuple(AlertKind)  # which alerts go here (default: all)
    timeout_s: float = Field(default=5.0, gt=0)  # per HTTP request

    @model_validator(mode="before")
    @classmethod
    def _no_url_in_config(cls, data: Any) -> Any:
        if isinstance(data, dict) and "url" in data:
            raise ValueError(
                "a webhook URL is never written in the config: put it in an environment variable "
                "and name that variable in url_env"
            )
        return data


class NotificationSettings(BaseModel):
    """Alerts of the monitor (docs/operations.md). No webhook: no alert is sent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    webhooks: tuple[WebhookSettings, ...] = ()  # receivers; none: no alert is sent
    max_tries: int = Field(default=4, ge=1)  # per message and webhook, the first try included
    retry_base_s: float = Field(default=RETRY_BASE_S, gt=0)  # the first retry's wait (x4 each time)
    # messages waiting; past it new ones are dropped (and recorded)
    queue_size: int = Field(default=100, ge=1)
    # When the monitor stops, this long is given to deliver what is queued (the session_finished alert).
    drain_s: float = Field(default=10.0, ge=0)

    @model_validator(mode="after")
    def _unique_names(self) -> NotificationSettings:
        names = [w.name for w in self.webhooks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"webhook names must be unique (repeated: {', '.join(dupes)})")
        return self
