/* dplan.h - the dispatch plan's index rules in the form a backend builds it where the routing is
 * (plain C, usable in host and device code): a route table maps each token-expert pair to a cell
 * (destination rank, local expert there), and a stable sort of the pairs by cell gives the send
 * rows, dense (dynamic dispatch) or in fixed slots (padded dispatch). */
#ifndef MP_DPLAN_H
#define MP_DPLAN_H

#include <stdint.h>

#include "hostdevice.h"
#include "padded.h" /* mp_padded_row */

/* The cell of the pair of global token `token` routed to `expert`: route_off[expert] ..
 * route_off[expert+1] lists the candidate cells (mp_route_table's: chunk, dest, local index); one
 * candidate when the source holds the expert, else one per holder on the source's node, or one per
 * holder when its node has none, the token choosing among them as mp_placement_dest does (token
 * mod candidates). −1 cells are pairs not sent. */
static inline MP_HD int32_t mp_dplan_cell(const int32_t *route_off, const int32_t *route_cell,
                                          int expert, long token)
{
    int32_t lo = route_off[expert], n = route_off[expert + 1] - lo;
    return route_cell[lo + (n > 1 ? (int32_t)(token % n) : 0)];
}

/* The send row of the pair at position `pos` of the pairs sorted stably by cell, whose cell `cell`
 * starts at position `cell_start` in that order: `pos` itself in the dynamic dispatch (cap ≤ 0);
 * in the padded dispatch the slot row of the (pos − cell_start)-th pair of the cell, or −1 when
 * that is past the slot's `cap` rows (dropped). */
static inline MP_HD long mp_dplan_row(int32_t cell, long pos, long cell_start, long cap,
                                      int max_local)
{
    if (cap <= 0)
        return pos;
    return mp_padded_row(cell / max_local, cell % max_local, pos - cell_start, max_local, cap);
}

/* Bits that hold every key of a sort by cell over `ncells` cells plus the key `ncells` that sorts
 * unsent pairs last. */
static inline MP_HD int mp_dplan_key_bits(int ncells)
{
    int b = 1;
    while (b < 31 && ((int32_t)1 << b) <= ncells)
        b++;
    return b;
}

#endif
