-- 0015: blobs left without a reference, until their bytes are removed
-- (see the postgres migration of the same name). Expand only.
CREATE INDEX blobs_unreferenced ON blobs (hash) WHERE refs = 0;
