# added (not upstream): upstream also imports the part-segmentation and classification variants.
