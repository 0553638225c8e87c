/* loops_adapter.c: probe_adapter.c for loops_game.exe (tests/shim/test_inject_loops.py),
 * with what the step-point kinds need of an adapter:
 *
 * W3P_STEP_HOOK=1  step_point = "adapter": at attach, point the game's frame callback
 *                  (its export probe_on_frame, a modding hook) at a function that calls
 *                  host->step, as an adapter's own hook in the frame would
 * Built with -DLOOPS_FRAME it exports w3a_frame, the game's frame counter.
 */
#define w3a_attach probe_w3a_attach
#include "probe_adapter.c"
#undef w3a_attach

static void on_frame(long long frame)
{
    (void)frame;
    H->step();
}

W3A_EXPORT int w3a_attach(const w3h_host *host, char *err, size_t errlen)
{
    int rc = probe_w3a_attach(host, err, errlen);
    if (rc || !env_long("W3P_STEP_HOOK", 0))
        return rc;
    void (**hook)(long long) = (void (**)(long long))host->find_export(NULL, "probe_on_frame");
    if (!hook || !host->step) {
        snprintf(err, errlen, "%s", !hook ? "the game exports no probe_on_frame" : "the hook gives no host->step");
        return 1;
    }
    *hook = on_frame;
    return 0;
}

#ifdef LOOPS_FRAME
W3A_EXPORT uint64_t w3a_frame(void)
{
    return (uint64_t)state->frames;
}
#endif
