"""Supervision for pykka actors, modelled on Erlang/OTP; import it from
:mod:`agentkeep.actors.supervisor`."""
