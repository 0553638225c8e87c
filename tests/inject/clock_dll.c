/* clock_dll.c: a DLL clock_game.exe loads after its start (LoadLibrary), for
 * tests/shim/test_inject_clock.py: its own imports of the clock must read game time too. */
#include <windows.h>

__declspec(dllexport) long long clock_dll_read(long long *out)
{
    LARGE_INTEGER c;
    QueryPerformanceCounter(&c);
    out[0] = (long long)GetTickCount64();
    out[1] = (long long)c.QuadPart;
    return out[0];
}
