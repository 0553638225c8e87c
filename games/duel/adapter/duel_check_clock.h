/* duel_check_clock.h: forced (-include) into standalone/duel_rt.c for
 * duel_adapter_check.exe only. The game's clock and its Sleep become the check's, whose
 * Sleep does at the step point what the hook does; its main becomes duel_rt_main. The
 * game's source is compiled unchanged. */
#include <windows.h>

BOOL du_check_qpc(LARGE_INTEGER *t);
BOOL du_check_qpf(LARGE_INTEGER *f);
void du_check_sleep(DWORD ms);

#define QueryPerformanceCounter du_check_qpc
#define QueryPerformanceFrequency du_check_qpf
#define Sleep du_check_sleep
#define main duel_rt_main
