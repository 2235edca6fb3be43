#include "coordinator/checkpoint_paths.h"

#include "gtest/gtest.h"

namespace frameworm::coordinator {
namespace {

TEST(CheckpointPathsTest, CleanAbsolutePaths) {
  for (const char* p : {"/", "/a", "/a/b", "/a/b/", "/a/.hidden/ckpt-1.pt"}) {
    EXPECT_TRUE(IsCleanAbsolutePath(p)) << p;
  }
  for (const std::string& p : {std::string(""), std::string("a/b"), std::string("/a/../b"),
                               std::string("/a/./b"), std::string("/a//b"), std::string("/.."),
                               std::string("/a\0b", 4), std::string(5000, '/'),
                               std::string("/a/\x1b[2J"), std::string("/a\nb"),
                               std::string("/a/\xc2\x9b" "2J")}) {
    EXPECT_FALSE(IsCleanAbsolutePath(p)) << p;
  }
}

TEST(CheckpointPathsTest, DirsMustBeUnderARoot) {
  const std::vector<std::string> roots = {"/state/checkpoints", "/mnt/nfs/"};
  EXPECT_TRUE(CheckCheckpointDirAllowed("", roots).ok());
  EXPECT_TRUE(CheckCheckpointDirAllowed("/state/checkpoints", roots).ok());
  EXPECT_TRUE(CheckCheckpointDirAllowed("/mnt/nfs/team/a", roots).ok());
  for (const char* d : {"/state/checkpoints-evil", "/mnt/nfsx", "/etc", "/state",
                        "/mnt/nfs/../etc", "relative"}) {
    absl::Status s = CheckCheckpointDirAllowed(d, roots);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << d;
    EXPECT_NE(s.message().find(d), std::string::npos) << s;
  }
}

TEST(CheckpointPathsTest, ReportedPathIsTheStepsFileInTheJobDir) {
  EXPECT_TRUE(CheckReportedCheckpointPath("/c/job-1/ckpt-20.pt", 20, "/c/job-1").ok());
  EXPECT_TRUE(CheckReportedCheckpointPath("/c/job-1/ckpt-20.pt", 20, "/c/job-1/").ok());
  for (const char* p : {"/c/job-1/ckpt-21.pt", "/c/job-2/ckpt-20.pt", "/c/job-1/../x/ckpt-20.pt",
                        "/etc/passwd", "/c/job-1/sub/ckpt-20.pt"}) {
    absl::Status s = CheckReportedCheckpointPath(p, 20, "/c/job-1");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p;
  }
  // A hostile path is quoted cut short and printable.
  absl::Status s =
      CheckReportedCheckpointPath("/c/job-1/" + std::string(1 << 20, 'p') + "\x1b[2J", 20, "/c/job-1");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(s.message().size(), 300u);
  EXPECT_EQ(s.message().find('\x1b'), std::string::npos);
  s = CheckCheckpointDirAllowed("/c/" + std::string(4000, 'd') + "\x1b[2J", {"/ckpt"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(s.message().size(), 300u);
  EXPECT_EQ(s.message().find('\x1b'), std::string::npos);
}

}  // namespace
}  // namespace frameworm::coordinator
