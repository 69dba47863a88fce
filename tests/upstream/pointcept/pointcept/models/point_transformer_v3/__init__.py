# added (not upstream): upstream also imports the v3m2 (Sonata) and v3m3 (Utonia) variants.
