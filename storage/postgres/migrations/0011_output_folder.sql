-- 0011: the ComfyUI folder type of each output ("output" for SaveImage,
-- "temp" for PreviewImage), which the ComfyUI-compatible front reports as
-- the file's `type`. NULL is "output": every row written before this
-- migration.
--
-- Expand only: a gateway of the previous release keeps working on this
-- schema. It inserts rows without the column (NULL) and reads none it does
-- not know.
ALTER TABLE job_outputs ADD COLUMN folder_type text NULL CHECK (folder_type <> '');
