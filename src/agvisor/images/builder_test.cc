#include "agvisor/images/builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

namespace agvisor::images {
namespace {

// The desktop recipe's xfconf channels are the embedded desktop/*.xml files, whole.
TEST(RecipeTest, DesktopShipsItsXfconfChannels) {
  auto recipe = RecipeFor("desktop");
  ASSERT_TRUE(recipe.ok());
  ASSERT_EQ(recipe->files.size(), 2u);
  for (const auto& [path, channel] :
       {std::pair{"/etc/xdg/xfce4/xfconf/xfce-perchannel-xml/xfce4-panel.xml", "xfce4-panel"},
        std::pair{"/etc/xdg/xfce4/xfconf/xfce-perchannel-xml/xfce4-desktop.xml",
                  "xfce4-desktop"}}) {
    const auto it = std::find_if(recipe->files.begin(), recipe->files.end(),
                                 [&](const ImageRecipe::File& f) { return f.path == path; });
    ASSERT_NE(it, recipe->files.end()) << path;
    EXPECT_TRUE(
        it->content.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<channel name=\"" +
                                std::string(channel) + "\""))
        << it->content;
    EXPECT_TRUE(it->content.ends_with("</channel>\n")) << it->content;
  }
  EXPECT_TRUE(RecipeFor("base")->files.empty());
}

}  // namespace
}  // namespace agvisor::images
