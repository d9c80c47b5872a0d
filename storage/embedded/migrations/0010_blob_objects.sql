-- 0010: the object that holds a blob's bytes (see the postgres migration of
-- the same name): NULL is the object at the hash's own address, where every
-- blob written before this migration is. Expand only: the previous
-- release's statements work unchanged on this schema.
ALTER TABLE blobs ADD COLUMN object_key TEXT CHECK (object_key <> '');

CREATE UNIQUE INDEX blobs_object_key ON blobs (object_key) WHERE object_key IS NOT NULL;
