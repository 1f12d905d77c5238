// The images a request brings, as each API sends them: OpenAI's image_url
// parts (a data: URL), Ollama's base64 `images`, Anthropic's base64 image
// blocks, the Responses API's input_image. Each becomes its file's bytes
// for the engine (engine/images.h decodes and bounds them) and a marker in
// the text where the image was (engine/image_prompt.h), so that the chat
// template places it. reclaim fetches nothing on a client's behalf: a URL
// that is not data: is a 400 naming it.
#pragma once

#include <string>
#include <vector>

namespace reclaim::server {

// The bytes of base64 text; a 400 naming `field` where it is not base64.
std::string image_from_base64(const std::string& text, const std::string& field);
// The bytes of a data: URL in base64; a 400 naming `field` for any other URL.
std::string image_from_url(const std::string& url, const std::string& field);
// The text that stands where an image was, for its template.
std::string image_place();
// A 400 naming `field` where a request brings more images than one may.
void check_image_count(size_t n, const std::string& field);

}  // namespace reclaim::server
