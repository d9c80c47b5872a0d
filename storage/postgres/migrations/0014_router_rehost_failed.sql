-- 0014: how many results of a router call's recorded answer kept the
-- partner's value because copying them into the gateway failed (issue 31),
-- so that a same-key replay repeats Comfygate-Rehost-Failed.
--
-- Expand only: a gateway of the previous release writes records without
-- the column (0) and reads none it does not know.
ALTER TABLE router_calls ADD COLUMN rehost_failed integer NOT NULL DEFAULT 0 CHECK (rehost_failed >= 0);
