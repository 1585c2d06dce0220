"""eqxevo's library: private; the faces re-export it."""
