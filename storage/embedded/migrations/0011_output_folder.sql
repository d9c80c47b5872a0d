-- 0011: the ComfyUI folder type of each output (see the postgres migration
-- of the same name): NULL is "output", as for every row written before
-- this migration. Expand only: the previous release's statements work
-- unchanged on this schema.
ALTER TABLE job_outputs ADD COLUMN folder_type TEXT CHECK (folder_type <> '');
