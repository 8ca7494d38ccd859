"""A Flower `Grid` over in-process nodes, for PowerTripStrategy's tests without a simulation
engine: every message goes to a real ClientApp, called with that node's own Context, and a
ClientApp that raises gives an error reply, as Flower's runtime does. Nodes can come up
after the ServerApp has started (each at its own time), which is the round-1 race a real
simulation can show (issue 61)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from flwr.app import (
    ArrayRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from powertrip.app.flower import SiteProfile, serve_profile
from powertrip.app.flower.profiles import PROFILE_QUERY

#: Flower's error code for a ClientApp that raised (flwr.common.constant.ErrorCode)
CLIENT_APP_RAISED_EXCEPTION = 2


def as_server_app() -> Callable[[], None]:
    """Give this process the identity a ServerApp process has (Flower's runtime sets it
    before `main`; Message() needs it), and return what undoes it."""
    before = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0

    def undo() -> None:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = before

    return undo


class StubGrid(Grid):
    """Flower's Grid interface over `len(node_configs)` in-process nodes; node i connects
    `online_after_s[i]` seconds after the grid is made, and answers a profile query
    `profile_delay_s[i]` seconds after it was sent (a cold start, a slow node)."""

    def __init__(
        self,
        app: ClientApp,
        node_configs: Sequence[dict],
        online_after_s: Sequence[float] | None = None,
        profile_delay_s: Sequence[float] | None = None,
    ) -> None:
        self.app = app
        self.node_ids = [101 + 7 * i for i in range(len(node_configs))]
        self.contexts = {
            node: Context(
                run_id=1, node_id=node, node_config=dict(config), state=RecordDict(), run_config={}
            )  # fmt: skip
            for node, config in zip(self.node_ids, node_configs, strict=True)
        }
        self.online_after_s = list(online_after_s or [0.0] * len(node_configs))
        self.profile_delay_s = dict(
            zip(self.node_ids, profile_delay_s or [0.0] * len(node_configs), strict=True)
        )
        self._ready_at: dict[str, float] = {}
        self.born = time.monotonic()
        self.sent: list[Message] = []
        self._run = None
        self._replies: dict[str, Message] = {}

    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id=dst_node_id, message_type=message_type,
                       group_id=group_id, ttl=ttl)  # fmt: skip

    def get_node_ids(self) -> Iterable[int]:
        age = time.monotonic() - self.born
        return [n for n, t in zip(self.node_ids, self.online_after_s, strict=True) if age >= t]

    def _deliver(self, message: Message) -> Message:
        self.sent.append(message)
        try:
            return self.app(message, self.contexts[message.metadata.dst_node_id])
        except Exception as exc:  # as Flower's runtime: the node's error, not the ServerApp's
            reason = f"{type(exc)}:<'{exc}'>"
            return Message(Error(code=CLIENT_APP_RAISED_EXCEPTION, reason=reason),
                           reply_to=message)  # fmt: skip

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for i, message in enumerate(messages):
            key = f"{len(self.sent)}-{i}"
            self._replies[key] = self._deliver(message)
            if message.metadata.message_type == PROFILE_QUERY:
                delay = self.profile_delay_s[message.metadata.dst_node_id]
                self._ready_at[key] = time.monotonic() + delay
            ids.append(key)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        now = time.monotonic()
        ready = [i for i in message_ids if i in self._replies and self._ready_at.get(i, 0) <= now]
        return [self._replies.pop(i) for i in ready]

    def send_and_receive(self, messages, *, timeout=None) -> Iterable[Message]:
        return list(self.pull_messages(self.push_messages(messages)))

    def trained(self) -> list[int]:
        """The nodes sent a train message, in order."""
        return [m.metadata.dst_node_id for m in self.sent if m.metadata.message_type == "train"]


def tiny_arrays() -> ArrayRecord:
    """A model of two small arrays: enough for FedAvg to average."""
    return ArrayRecord([np.zeros((4, 3), dtype=np.float32), np.zeros(3, dtype=np.float32)])


def profile_from_index(context: Context) -> SiteProfile:
    """Node i's site: power, latency and bandwidth that differ by node; the site id from
    node_config "site-id" where it has one (else the node's)."""
    i = int(context.node_config["partition-id"])
    return SiteProfile(
        site_id=str(context.node_config.get("site-id", "")),
        power_fraction=0.2 + 0.1 * (i % 8),
        latency_s=0.002 * (i + 1),
        bandwidth_bytes_per_s=1e8 / (i + 1),
    )


def client_app(profile_of: Callable[[Context], SiteProfile] = profile_from_index) -> ClientApp:
    """A ClientApp that answers the profile query and 'trains' by adding its node index."""
    app = ClientApp()
    serve_profile(app, profile_of)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        i = int(context.node_config["partition-id"])
        arrays = message.content["arrays"].to_numpy_ndarrays()
        trained = ArrayRecord([a + i for a in arrays])
        metrics = MetricRecord({"train_loss": 1.0 / (i + 1), "num-examples": 10 + i})
        return Message(RecordDict({"arrays": trained, "metrics": metrics}), reply_to=message)

    return app


def nodes(n: int, **node_config) -> list[dict]:
    """node_configs as a simulation gives them (partition-id, num-partitions), plus more."""
    return [{"partition-id": i, "num-partitions": n, **node_config} for i in range(n)]


class FlowerLog(logging.Handler):
    """What Flower's logger said (it does not propagate to pytest's caplog)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self, level: int = logging.DEBUG) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= level]
