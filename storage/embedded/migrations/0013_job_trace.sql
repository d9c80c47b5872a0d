-- 0013: the W3C traceparent of a job's submit (see the postgres migration
-- of the same name). Expand only.
ALTER TABLE jobs ADD COLUMN trace_parent TEXT CHECK (length(trace_parent) <= 256);
