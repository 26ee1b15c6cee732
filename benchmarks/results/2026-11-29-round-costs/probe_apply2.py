# Frozen at commit ed64128: run with `git checkout ed64128`; it imports tf-hetero internals of
# that commit, which may have moved or changed since. Results and command: README.md beside
# it.
"""Probe: where a round's apply time goes on the chief (see probe_apply.py); this one
copies the applier loop with timestamps and keeps each engine's rounds for the dump."""
import atexit, json, os, sys, time
import queue as queue_lib
from tf_hetero.strategies.runtime import applier
from tf_hetero.strategies.runtime.errors import translate
from tf_hetero.tools import cli

REC, ROUNDS = [], []


def _loop(ref, work):
    while True:
        try:
            item = work.get(timeout=applier.POLL_S)
        except queue_lib.Empty:
            coordinator = ref()
            if coordinator is None or coordinator.stopped:
                return
            del coordinator
            continue
        tg = time.perf_counter()
        if item is None:
            return
        coordinator = ref()
        if coordinator is None:
            return
        round_id, fn, args = item
        engine = coordinator.engine
        if not ROUNDS or ROUNDS[-1] is not engine.rounds:
            ROUNDS.append(engine.rounds)
        try:
            with coordinator.strategy.scope():
                t0 = time.perf_counter()
                out = fn(*args)
                t1 = time.perf_counter()
                applied, norm = (float(v) for v in out.numpy())
                t2 = time.perf_counter()
        except Exception as e:  # pylint: disable=broad-except
            engine.fail(translate(e))
        else:
            engine.apply_finished(round_id, int(round(applied)), grad_norm=norm)
            t3 = time.perf_counter()
            REC.append((len(ROUNDS) - 1, round_id, tg, t0, t1, t2, t3))
        del coordinator, engine


applier._loop = _loop


@atexit.register
def dump():
    out = []
    for k, rid, tg, t0, t1, t2, t3 in REC:
        rounds = ROUNDS[k]
        r = rounds[rid]
        nxt = rounds[rid + 1] if rid + 1 < len(rounds) else None
        out.append(dict(fit=k, rid=rid, close=r.t_close, got=tg, t0=t0, t1=t1, t2=t2, t3=t3,
                        applied=r.t_applied, next_open=getattr(nxt, "t_open", None)))
    with open(os.environ.get("PROBE_OUT", "/tmp/probe_apply.json"), "w") as f:
        json.dump(out, f)


sys.exit(cli.main(sys.argv[1:]))
