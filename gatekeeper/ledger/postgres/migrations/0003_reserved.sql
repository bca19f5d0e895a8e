-- Reserved: schema version 3 belongs to a change landing separately
-- (admission tickets). This no-op keeps versions 1..n without gaps until it
-- lands and replaces this file.
SELECT 1;
