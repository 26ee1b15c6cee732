"""How fast is this host right now: a fixed pure-Python loop and a fixed numpy matmul."""
import time, numpy as np
t = time.perf_counter(); x = 0
for i in range(5_000_000): x += i * i
py = time.perf_counter() - t
a = np.random.default_rng(0).normal(size=(400, 400)).astype("float32")
t = time.perf_counter()
for _ in range(200): a @ a
mm = time.perf_counter() - t
print(f"hostprobe python_loop_s={py:.3f} matmul_s={mm:.3f}", flush=True)
