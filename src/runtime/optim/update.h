/* optim/update.h - the update rules themselves, one plain loop each, and the
 * learning-rate schedule: what
 * every optimizer path in kiln must compute bit for bit (the runtime's fast
 * paths, optim/optim.h, and the parameter servers' updates, src/ps/server.c).
 *
 * This module is its own small library (kiln_optim_ref), so that the
 * parameter server links the arithmetic without the whole runtime, which in
 * turn links the parameter server (the parameter_server strategy).
 *
 * SGD with momentum, PyTorch's form: v = momentum*v + g; p -= lr*v.
 * Adam (Kingma & Ba) in PyTorch's arithmetic: m = b1*m + (1-b1)*g,
 * v = b2*v + (1-b2)*g*g, p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps),
 * t = the 1-based step number. */
#ifndef KILN_RT_OPTIM_UPDATE_H
#define KILN_RT_OPTIM_UPDATE_H

#include <stddef.h>
#include <stdint.h>

void kiln_sgd_update_ref(float *p, const float *g, float *v, size_t n, float lr, float momentum);
void kiln_adam_update_ref(float *p, const float *g, float *m, float *v, size_t n, float lr,
                          float b1, float b2, float eps, uint64_t t);
/* Adam's step size lr/(1-b1^t) and sqrt(1-b2^t): computed in double and
 * rounded once, here only, so that every path uses the same two floats. */
void kiln__adam_consts(float lr, float b1, float b2, uint64_t t, float *step, float *sqrt_bc2);

/* The cosine schedule of kiln-train (single run, replicas and parameter
 * servers alike): base * (1 + cos(pi * step / total)) / 2, step capped at
 * total; base when total is 0. A pure function of the step, so a resumed run
 * needs no extra state for it. */
float kiln_lr_cosine(double base, uint64_t step, uint64_t total);

#endif
