-- 0010: the object that holds a blob's bytes.
--
-- An upload stays where it was streamed (an object store has no rename, and
-- a copy costs a second pass over every byte), so the blob row records the
-- object's key; the hash stays the row's key, so content addressing and
-- dedup live here. NULL is the object at the hash's own address
-- (<prefix>objects/ab/cd/<hex>): every row written before this migration,
-- every blob of the file_system store, and uploads that declared their hash.
--
-- Expand only: a gateway of the previous release keeps working on this
-- schema. It inserts rows without the column (NULL, which is where it
-- writes its objects) and reads none it does not know.
ALTER TABLE blobs ADD COLUMN object_key text NULL CHECK (object_key <> '');

-- One row per object, and the orphan sweep's lookup by key.
CREATE UNIQUE INDEX blobs_object_key ON blobs (object_key) WHERE object_key IS NOT NULL;
