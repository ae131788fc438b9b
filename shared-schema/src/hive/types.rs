//! Hive's 74 event types (`class EventType`, framework 0.7.1, commit 54fd8db4) and what each becomes.

use super::{Classification as C, Derive as D, FilterReason as F};
use crate::event::EventKind as K;

/// Every Hive event type with its classification. A test checks there are exactly 74, all distinct.
pub const HIVE_EVENT_TYPES: [(&str, C); 74] = [
    // streaming deltas
    ("llm_text_delta", C::Filtered(F::StreamingDelta)),
    ("llm_reasoning_delta", C::Filtered(F::StreamingDelta)),
    ("client_output_delta", C::Filtered(F::StreamingDelta)),
    // chatty, no durable meaning
    ("context_usage_updated", C::Filtered(F::Chatty)),
    ("node_loop_iteration", C::Filtered(F::Chatty)),
    ("loop_state_changed", C::Filtered(F::Chatty)),
    ("reminder_injected", C::Filtered(F::Chatty)),
    ("judge_verdict", C::Filtered(F::Chatty)),
    ("session_snapshot", C::Filtered(F::Chatty)),
    // usage and lifecycle
    ("llm_turn_complete", C::Durable(K::LlmTurn, D::None)),
    (
        "tool_call_started",
        C::Durable(K::ToolCall, D::Status("started")),
    ),
    (
        "tool_call_completed",
        C::Durable(K::ToolCall, D::Status("completed")),
    ),
    (
        "execution_started",
        C::Durable(K::Execution, D::Lifecycle("execution", "started")),
    ),
    (
        "execution_completed",
        C::Durable(K::Execution, D::Lifecycle("execution", "completed")),
    ),
    (
        "execution_failed",
        C::Durable(K::Execution, D::Lifecycle("execution", "failed")),
    ),
    (
        "execution_paused",
        C::Durable(K::Execution, D::Lifecycle("execution", "paused")),
    ),
    (
        "execution_resumed",
        C::Durable(K::Execution, D::Lifecycle("execution", "resumed")),
    ),
    (
        "execution_resurrected",
        C::Durable(K::Execution, D::Lifecycle("execution", "resurrected")),
    ),
    (
        "payment_required",
        C::Durable(K::SessionInput, D::State("payment_required")),
    ),
    (
        "stream_started",
        C::Durable(K::Execution, D::Lifecycle("stream", "started")),
    ),
    (
        "stream_stopped",
        C::Durable(K::Execution, D::Lifecycle("stream", "stopped")),
    ),
    (
        "node_loop_started",
        C::Durable(K::Execution, D::Lifecycle("node_loop", "started")),
    ),
    (
        "node_loop_completed",
        C::Durable(K::Execution, D::Lifecycle("node_loop", "completed")),
    ),
    ("subagent_report", C::Durable(K::WorkerFinished, D::None)),
    (
        "worker_completed",
        C::Durable(K::WorkerFinished, D::Status("completed")),
    ),
    (
        "worker_failed",
        C::Durable(K::WorkerFinished, D::Status("failed")),
    ),
    // status and health
    (
        "node_stalled",
        C::Durable(K::HealthSignal, D::Signal("stalled")),
    ),
    (
        "node_tool_doom_loop",
        C::Durable(K::HealthSignal, D::Signal("doom_loop")),
    ),
    (
        "node_retry",
        C::Durable(K::HealthSignal, D::Signal("retry")),
    ),
    (
        "node_input_blocked",
        C::Durable(K::HealthSignal, D::Signal("input_blocked")),
    ),
    (
        "stream_ttft_exceeded",
        C::Durable(K::HealthSignal, D::Signal("ttft_exceeded")),
    ),
    (
        "stream_inactive",
        C::Durable(K::HealthSignal, D::Signal("inactive")),
    ),
    (
        "stream_nudge_sent",
        C::Durable(K::HealthSignal, D::Signal("nudge_sent")),
    ),
    (
        "tool_call_replay_detected",
        C::Durable(K::HealthSignal, D::Signal("replay_detected")),
    ),
    (
        "context_compaction_started",
        C::Durable(K::HealthSignal, D::Signal("compaction_started")),
    ),
    (
        "context_compacted",
        C::Durable(K::HealthSignal, D::Signal("compacted")),
    ),
    (
        "escalation_requested",
        C::Durable(K::HealthSignal, D::Signal("escalation_requested")),
    ),
    // session, queen, colony
    ("queen_identity_selected", C::Filtered(F::NotDurable)),
    ("queen_phase_changed", C::Durable(K::SessionPhase, D::None)),
    (
        "colony_created",
        C::Durable(K::ColonyCreated, D::Source("created")),
    ),
    ("colony_suggestion_requested", C::Filtered(F::NotDurable)),
    (
        "worker_colony_loaded",
        C::Durable(K::ColonyCreated, D::Source("loaded")),
    ),
    (
        "session_forked",
        C::Durable(K::ColonyCreated, D::Source("forked")),
    ),
    (
        "credentials_required",
        C::Durable(K::SessionInput, D::State("credentials_required")),
    ),
    (
        "client_input_requested",
        C::Durable(K::SessionInput, D::State("requested")),
    ),
    (
        "client_input_received",
        C::Durable(K::SessionInput, D::State("received")),
    ),
    (
        "client_input_committed",
        C::Durable(K::SessionInput, D::State("committed")),
    ),
    ("client_reasoning", C::Filtered(F::NotDurable)),
    (
        "client_credential_form_requested",
        C::Durable(K::SessionInput, D::State("credential_form_requested")),
    ),
    ("node_internal_output", C::Filtered(F::NotDurable)),
    // tasks and triggers
    (
        "task_created",
        C::Durable(K::TaskChanged, D::Action("created")),
    ),
    (
        "task_updated",
        C::Durable(K::TaskChanged, D::Action("updated")),
    ),
    (
        "task_deleted",
        C::Durable(K::TaskChanged, D::Action("deleted")),
    ),
    (
        "task_list_reset",
        C::Durable(K::TaskChanged, D::Action("list_reset")),
    ),
    (
        "task_list_reattach_mismatch",
        C::Durable(K::TaskChanged, D::Action("reattach_mismatch")),
    ),
    (
        "trigger_available",
        C::Durable(K::TriggerChanged, D::Action("available")),
    ),
    (
        "trigger_activated",
        C::Durable(K::TriggerChanged, D::Action("activated")),
    ),
    (
        "trigger_deactivated",
        C::Durable(K::TriggerChanged, D::Action("deactivated")),
    ),
    (
        "trigger_fired",
        C::Durable(K::TriggerChanged, D::Action("fired")),
    ),
    (
        "trigger_removed",
        C::Durable(K::TriggerChanged, D::Action("removed")),
    ),
    (
        "trigger_updated",
        C::Durable(K::TriggerChanged, D::Action("updated")),
    ),
    (
        "missed_triggers",
        C::Durable(K::TriggerChanged, D::Action("missed")),
    ),
    // other: not durable by default
    ("state_changed", C::Filtered(F::NotDurable)),
    ("state_conflict", C::Filtered(F::NotDurable)),
    ("goal_progress", C::Filtered(F::NotDurable)),
    ("goal_achieved", C::Filtered(F::NotDurable)),
    ("constraint_violation", C::Filtered(F::NotDurable)),
    ("webhook_received", C::Filtered(F::NotDurable)),
    ("custom", C::Filtered(F::NotDurable)),
    ("credential_provider_connected", C::Filtered(F::NotDurable)),
    (
        "credential_provider_disconnected",
        C::Filtered(F::NotDurable),
    ),
    ("tool_catalog_refreshed", C::Filtered(F::NotDurable)),
    ("tools_config_changed", C::Filtered(F::NotDurable)),
    ("crm_changed", C::Filtered(F::NotDurable)),
];
