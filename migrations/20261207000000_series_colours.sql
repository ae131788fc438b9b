-- Series colours: the colour slot each series of a tenant's charts keeps (a model, user or colony key per
-- dimension), so a series has one colour on every chart, range and page. A key's slot is chosen the
-- first time a chart draws it (its preferred slot, else the next one no key of that dimension holds) and
-- never changes. Dashboard display state only: no usage figure depends on it.
CREATE TABLE series_colours (
    tenant_id   uuid     NOT NULL,
    dimension   text     NOT NULL CHECK (dimension IN ('model', 'user', 'colony')),
    series_key  text     NOT NULL,
    slot        smallint NOT NULL CHECK (slot BETWEEN 0 AND 11),
    PRIMARY KEY (tenant_id, dimension, series_key)
);
