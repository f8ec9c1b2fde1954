"""Reading what users hand the toolkit, the low layer every stage reads user input through:
opening a file (`files`: never a blocking open, a whole file bounded from its size, every user JSON
parsed by one function), compressed input (`compression`: gzip or zstd by magic bytes, zstd frames
walked whole first), text (`text`: the bounded line reader and the one whole-file reader),
Parquet page headers (`parquet_pages`), and, before any stage runs, a user's model folder
(`model_folder`: weights from headers, parts against each other, the one tokenizer id count) and a
base's tokenizer.json (`tokenizer_json`: merges, vocabulary, what the tokenizers library refuses)."""
