/* cpu.h - a pause inside a busy-poll loop (frees the core's pipeline for a
 * sibling hyperthread and saves power). */
#ifndef VSOCKET_CPU_H
#define VSOCKET_CPU_H

static inline void vs_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

#endif
