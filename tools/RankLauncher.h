// tlc train --nproc=N: the ranks of a data-parallel run on this machine, as torchrun
// starts them. Each rank is this tlc again, without --nproc, with torchrun's variables
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so a rank
// started here runs exactly as one torchrun starts. Their output comes back line by
// line, each line prefixed with its rank ("[rank 1] "), stdout to stdout and stderr to
// stderr.
//
// A rank that fails or is killed is named at once; the others then get a grace period
// to stop on their own (they learn of it through the store and say which rank stopped),
// and any still running after it are killed, so the whole run ends well within 30 s of
// the failure, never hangs.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace tlc {

// Runs `ranks` copies of this executable with `arguments` (argv[1..], --nproc already
// taken out) and returns the exit status for the launcher: 0 when every rank succeeded.
int launchRanks(const std::vector<std::string> &arguments, int ranks,
                std::chrono::seconds grace = std::chrono::seconds(20));

// argv[1..] without --nproc (--nproc=N, -nproc=N, --nproc N), for the ranks.
std::vector<std::string> withoutNproc(int argc, char **argv);

} // namespace tlc
