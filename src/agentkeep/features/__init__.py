"""Features: named bundles of hooks, composed in order into one agent's hooks.

A :class:`Feature` overrides any subset of the hook methods below; one instance serves every
agent of a system and learns which agent a hook runs for from the :class:`HookContext` it is
handed. Composition rules (seed: AgentFeature), kept by :class:`FeatureSet`:

- observing hooks (``on_event``, ``before_agent_loop``, ``before_inference``,
  ``after_inference``, ``after_agent_settled``) fan out with per-feature isolation: one
  failing feature never silences the others, and never fails the run;
- ``instructions`` and ``tools`` concatenate after the system's base state and stay loud: a
  failing feature fails the turn rather than run with a wrong configuration;
- action hooks (``before_turn``, ``after_turn``, ``after_agent_loop``) concatenate their
  actions; a failing feature loses only its own;
- ``permission_mode_changed_transact`` (like ``message_accepted_transact``) chains in order
  inside the consumption transaction and propagates a failure, rolling the consumption back;
  ``permission_mode_changed`` observes after it committed, with per-feature isolation;
- compaction: ``before_compaction`` and ``after_compaction`` observe with per-feature
  isolation; ``history_erased_transact`` chains in order inside the replacement transaction
  and propagates a failure, rolling the compaction back (it then fails);
- ``model_changed``: every feature observes; the first returned handoff wins; a failure is
  re-raised only when the change resets the history (which rejects the switch);
- ``system_notifications_transact`` chains in order inside the transaction appending at its
  boundary (a message's consumption, or the inference stage's opening), concatenating the
  notices in feature order, and propagates a failure (rolling that transaction back, no
  request made); ``prepare_inference``: any feature returning ``CompactAction`` compacts
  before the request, a failing feature loses only its own decision;
- the transactional lifecycle twins (``before_agent_loop_transact``,
  ``before_turn_transact``, ``before_inference_transact``, ``on_event_transact``,
  ``after_inference_transact``, ``after_turn_transact``, ``after_agent_loop_transact``,
  ``after_agent_settled_transact``) chain in order inside the commit that makes their
  lifecycle fact durable and propagate a failure, rolling it back (docs/hooks.md says what
  the loop does then);
- tool-call hooks (:mod:`agentkeep.tools.hooks`): the transactional ones
  (``before_tool_call_transact``, ``after_tool_call_transact``) chain in order and propagate
  a failure, rolling their transaction back; ``before_tool_call`` chains amendments, the
  first answer wins, and a failure becomes the call's error result (:mod:`.tool_calls`);
  ``after_tool_call`` observes with per-feature isolation.

Import every name from here (or from ``agentkeep``). The package's modules, each importing
only those listed before it: :mod:`.arguments` (what hooks are handed: :class:`HookContext`,
:class:`TurnInfo`, :class:`ModelChange` and the rest), :mod:`.feature` (:class:`Feature` and
:data:`HOOKS`), :mod:`.feature_set` (:class:`FeatureSet`, the rules above) and
:mod:`.tool_calls` (the ``before_tool_call`` chain).
"""

from agentkeep.features.arguments import (
    HookContext,
    InferenceBoundary,
    InferenceInfo,
    MessageAccepted,
    MessageBoundary,
    MetadataChange,
    ModelChange,
    NotificationBoundary,
    PermissionModeChange,
    TurnInfo,
)
from agentkeep.features.feature import HOOKS, Feature
from agentkeep.features.feature_set import FeatureSet

__all__ = [
    "HOOKS",
    "Feature",
    "FeatureSet",
    "HookContext",
    "InferenceBoundary",
    "InferenceInfo",
    "MessageAccepted",
    "MessageBoundary",
    "MetadataChange",
    "ModelChange",
    "NotificationBoundary",
    "PermissionModeChange",
    "TurnInfo",
]
