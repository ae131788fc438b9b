-- Alerts (issue 17, items 4 and 5): where notifications go, what fires them, what fired, and the
-- notifications outbox that delivers each exactly once (ingest/src/alerts/).
--
-- Exactly once: an alert is one row per (rule, episode) — the episode names what fired (a budget's
-- threshold in a period, a session's stretch in a status, a device's silence since a time) — inserted
-- with ON CONFLICT DO NOTHING, and its notifications are inserted in the same transaction, keyed by an
-- idempotency key (alert + event). Replicas claim due notifications with FOR UPDATE SKIP LOCKED and a
-- lease, so one replica sends each; the receiver gets the key to drop a repeat after a crash between its
-- answer and our record of it.

CREATE TABLE alert_destinations (
    tenant_id       uuid        NOT NULL REFERENCES tenants (tenant_id),
    destination_id  text        NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('webhook', 'slack')),
    url             text        NOT NULL,
    -- HMAC-SHA256 key of a webhook's signature (never returned by the API).
    secret          text,
    name            text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, destination_id)
);

CREATE TABLE alert_rules (
    tenant_id          uuid        NOT NULL REFERENCES tenants (tenant_id),
    rule_id            text        NOT NULL,
    kind               text        NOT NULL
                       CHECK (kind IN ('budget', 'session_status', 'device_offline', 'silence')),
    name               text,
    destination_id     text        NOT NULL,
    -- budget: this budget (NULL: any of the tenant's)
    budget_id          text,
    -- session_status: the statuses that fire, and how long a session must stay in one
    statuses           text[],
    min_duration_secs  bigint      NOT NULL DEFAULT 0,
    -- device_offline: also fire when a device's backlog reaches this many events
    backlog_events     bigint,
    -- silence: hours without anything from a device that was active on recent working days
    silence_hours      bigint,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, rule_id),
    FOREIGN KEY (tenant_id, destination_id) REFERENCES alert_destinations (tenant_id, destination_id)
);

CREATE TABLE alerts (
    tenant_id    uuid        NOT NULL,
    alert_id     text        NOT NULL,
    rule_id      text        NOT NULL,
    episode      text        NOT NULL,
    -- what it is about: a budget, session or device id
    subject      text        NOT NULL,
    state        text        NOT NULL CHECK (state IN ('firing', 'resolved')),
    summary      text        NOT NULL,
    details      jsonb       NOT NULL DEFAULT '{}',
    fired_at     timestamptz NOT NULL DEFAULT now(),
    resolved_at  timestamptz,
    PRIMARY KEY (tenant_id, alert_id),
    UNIQUE (tenant_id, rule_id, episode),
    FOREIGN KEY (tenant_id, rule_id) REFERENCES alert_rules (tenant_id, rule_id) ON DELETE CASCADE
);
CREATE INDEX alerts_firing ON alerts (tenant_id, rule_id) WHERE state = 'firing';
CREATE INDEX alerts_recent ON alerts (tenant_id, fired_at DESC);

CREATE TABLE notifications (
    tenant_id        uuid        NOT NULL,
    notification_id  text        NOT NULL,
    alert_id         text        NOT NULL,
    destination_id   text        NOT NULL,
    event            text        NOT NULL CHECK (event IN ('firing', 'resolved')),
    idempotency_key  text        NOT NULL,
    payload          jsonb       NOT NULL,
    state            text        NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    -- a replica sending it holds it until then (a replica that died mid-send lets it go)
    lease_until      timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    PRIMARY KEY (tenant_id, notification_id),
    UNIQUE (tenant_id, idempotency_key),
    FOREIGN KEY (tenant_id, alert_id) REFERENCES alerts (tenant_id, alert_id) ON DELETE CASCADE
);
CREATE INDEX notifications_due ON notifications (next_attempt_at) WHERE state = 'pending';
