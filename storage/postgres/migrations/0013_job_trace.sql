-- 0013: the trace context of a job's submit (issue 30).
--
-- trace_parent is the W3C traceparent of the submit's span: the dispatch
-- and execution spans of whichever gateway claims the job continue that
-- trace. NULL when the job was submitted with tracing off.
--
-- Expand only: a gateway of the previous release inserts jobs without the
-- column (NULL) and reads none it does not know.
ALTER TABLE jobs ADD COLUMN trace_parent text NULL CHECK (length(trace_parent) <= 256);
