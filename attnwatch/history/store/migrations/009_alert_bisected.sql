-- 009_alert_bisected: an alert's lifecycle also records where a bisection placed its step.
-- A bisection (by a person or a script) ends with the commit that caused a regression; that is
-- part of the alert's story, so it is an event ('bisected', note naming the commit), notified like
-- the other transitions. The alert's status does not change. 002's CHECK on `action` cannot be
-- altered in place, so the log is copied into a table with the wider CHECK, same ids and rows.
CREATE TABLE alert_events_009 (
    event_id    BIGINT PRIMARY KEY DEFAULT nextval('alert_event_ids'),
    alert_id    BIGINT NOT NULL,
    action      VARCHAR NOT NULL CHECK (action IN ('opened', 'acknowledged', 'resolved', 'bisected')),
    note        VARCHAR NOT NULL DEFAULT '',
    actor       VARCHAR NOT NULL DEFAULT '',
    happened_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);
INSERT INTO alert_events_009 (event_id, alert_id, action, note, actor, happened_at)
    SELECT event_id, alert_id, action, note, actor, happened_at FROM alert_events;
DROP TABLE alert_events;
ALTER TABLE alert_events_009 RENAME TO alert_events;
