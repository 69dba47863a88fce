# added (not upstream): upstream also imports the v2m1 and v2m3 variants.
