// Hostfiles as an elastic restart reads and rewrites them (launch/hostfile.h), and the host a
// failed remote start names (parse_unreachable_host).
#include <gtest/gtest.h>

#include "launch/failure.h"
#include "launch/hostfile.h"

namespace strata::launch {
namespace {

TEST(Hostfile, HostsSlotsAndCommentsAsOpenMpiReadsThem) {
  const std::string text =
      "# three hosts\n10.77.9.11 slots=2\n\n  node-b   slots = 4 max_slots=8  # big\nnode-c\n";
  const std::vector<HostfileEntry> e = parse_hostfile(text);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].host, "10.77.9.11");
  EXPECT_EQ(e[0].slots, 2);
  EXPECT_EQ(e[1].host, "node-b");
  EXPECT_EQ(e[1].slots, 4);
  EXPECT_EQ(e[2].host, "node-c");
  EXPECT_EQ(e[2].slots, 0);  // Open MPI counts the cores
}

TEST(Hostfile, WithoutAHostKeepsTheOthersAsWritten) {
  const std::string text = "10.77.9.11 slots=2\n10.77.9.12 slots=2\n10.77.9.13 slots=2\n";
  std::vector<HostfileEntry> removed;
  EXPECT_EQ(hostfile_without(text, "10.77.9.13", removed),
            "10.77.9.11 slots=2\n10.77.9.12 slots=2\n");
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].slots, 2);
  EXPECT_EQ(hostfile_without(text, "10.77.9.1", removed), text);  // a prefix is not the host
  EXPECT_TRUE(removed.empty());
}

TEST(ParseFailure, NamesTheHostARemoteStartCouldNotReach) {
  EXPECT_EQ(parse_unreachable_host("ssh: connect to host 10.77.9.13 port 22: Connection timed "
                                   "out\n-----\nORTE was unable to reliably start one or more "
                                   "daemons.\n"),
            std::optional<std::string>("10.77.9.13"));
  EXPECT_EQ(parse_unreachable_host("ssh: connect to host node7 port 2222: No route to host\n"),
            std::optional<std::string>("node7"));
  EXPECT_EQ(parse_unreachable_host("ssh: Could not resolve hostname node8: Name or service not "
                                   "known\n"),
            std::optional<std::string>("node8"));
  EXPECT_FALSE(parse_unreachable_host("ORTE was unable to reliably start one or more daemons.\n"));
  EXPECT_TRUE(is_failure_report_line("ssh: connect to host a port 22: Connection refused"));
}

}  // namespace
}  // namespace strata::launch
