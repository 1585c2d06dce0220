"""Experiments from their configs: build (`build`), resources (`resources`), the
run directory (`rundir`), one run through `evolve` (`run`) and a finished run
looked at again (`review`)."""
