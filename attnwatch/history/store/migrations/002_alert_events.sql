-- The lifecycle of each alert as an append-only log: who opened, acknowledged or resolved
-- it, when, and with what note. `alerts` keeps only the latest note and actor, so without
-- this log an acknowledgement's note and author would be lost when the alert is resolved.
CREATE SEQUENCE alert_event_ids START 1;

CREATE TABLE alert_events (
    event_id    BIGINT PRIMARY KEY DEFAULT nextval('alert_event_ids'),
    alert_id    BIGINT NOT NULL,
    action      VARCHAR NOT NULL CHECK (action IN ('opened', 'acknowledged', 'resolved')),
    note        VARCHAR NOT NULL DEFAULT '',
    actor       VARCHAR NOT NULL DEFAULT '',
    happened_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);
