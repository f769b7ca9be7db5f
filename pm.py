import os, time; os.environ["RINGFEED_RUNTIME_DIR"]="/tmp/breakit/rt"
import ringfeed, resource
resource.setrlimit(resource.RLIMIT_NOFILE,(4096,4096))
cs=[]
try:
    for i in range(300):
        cs.append(ringfeed.Client("py1", timeout=2))
except BaseException as e: print("after", len(cs), type(e).__name__, str(e)[:300])
held=[]
try:
    for c in cs[:20]:
        held.append(c.next())
except BaseException as e: print("next after", len(held), type(e).__name__, str(e)[:400])
t=time.time()
try: cs[-1].next(timeout=None) if False else None
except BaseException as e: print(e)
for c in cs: c.close()
held.clear()
time.sleep(0.5)
c=ringfeed.Client("py1", timeout=2); print("fresh ok", c.next().index)
