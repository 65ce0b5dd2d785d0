-- The webhook intake commits each delivery in this database before its 202; the delivery log, and
-- the position its writer had reached, are gone.
DROP TABLE IF EXISTS intake_position;
